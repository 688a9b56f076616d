//! Running one external program with a hard time limit and its output captured.
//!
//! The tools are benchmark programs that block forever when their peer never comes (a server
//! waiting in `accept`, a client stuck in a handshake), so every run is bounded: when the limit
//! passes, the child is killed with SIGKILL and reaped. Output goes to a file rather than a pipe
//! so that nothing has to drain it while the child runs (no reader threads, no pipe-full stalls)
//! and the measurement is not disturbed by our process waking up for every line.

use std::borrow::Cow;
use std::fmt;
use std::fs::{self, File};
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// One program invocation: environment additions, the CPU it is pinned to, program name
/// (looked up on PATH) and arguments. Its [`Display`](fmt::Display) is the exact command line,
/// shell-quoted, as recorded in [`Series::command`](crate::model::Series::command); the pinning
/// shows as the equivalent `taskset -c CPU` before the program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandLine {
    pub cpu: Option<usize>,
    pub env: Vec<(String, String)>,
    pub program: String,
    pub args: Vec<String>,
}

impl CommandLine {
    /// `program` with no arguments and no environment.
    pub fn new(program: &str) -> CommandLine {
        CommandLine {
            cpu: None,
            env: Vec::new(),
            program: program.to_string(),
            args: Vec::new(),
        }
    }

    /// Pins the child to `cpu` (nothing when `None`).
    pub fn on_cpu(mut self, cpu: Option<usize>) -> CommandLine {
        self.cpu = cpu;
        self
    }

    /// Adds an environment variable for the child.
    pub fn env(mut self, key: &str, value: &str) -> CommandLine {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> CommandLine
    where
        I: IntoIterator<Item = S>,
        S: ToString,
    {
        self.args.extend(args.into_iter().map(|a| a.to_string()));
        self
    }
}

impl fmt::Display for CommandLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (key, value) in &self.env {
            write!(f, "{key}={} ", quote(value))?;
        }
        if let Some(cpu) = self.cpu {
            write!(f, "taskset -c {cpu} ")?;
        }
        write!(f, "{}", quote(&self.program))?;
        for arg in &self.args {
            write!(f, " {}", quote(arg))?;
        }
        Ok(())
    }
}

/// Quotes `word` for a POSIX shell when it holds anything but plain characters (e.g. the `;` in
/// libfabric's `udp;ofi_rxd`), so that the recorded command can be pasted and run as is.
fn quote(word: &str) -> Cow<'_, str> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:=,@%+".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        Cow::Borrowed(word)
    } else {
        Cow::Owned(format!("'{}'", word.replace('\'', r"'\''")))
    }
}

/// How a bounded run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// Exit status 0.
    Success,
    /// Any other end; the text says how (`exit status: 1`, `signal: 11`).
    Failed(String),
    /// Still running at the limit; it was killed.
    TimedOut,
}

/// The end of a bounded run and everything the child wrote to stdout and stderr.
#[derive(Debug, Clone)]
pub struct Finished {
    pub exit: Exit,
    pub output: String,
}

/// Runs `cmd` in `dir` for at most `limit`, with stdout and stderr both written to
/// `dir/<log_name>.log`. Errors only when the child cannot be started or waited for.
pub fn run_bounded(
    cmd: &CommandLine,
    dir: &Path,
    log_name: &str,
    limit: Duration,
) -> io::Result<Finished> {
    let log_path = dir.join(format!("{log_name}.log"));
    let log = File::create(&log_path)?;
    let mut command = Command::new(&cmd.program);
    command
        .args(&cmd.args)
        .envs(cmd.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    if let Some(cpu) = cmd.cpu {
        // SAFETY: the closure runs in the forked child before exec and only makes the
        // async-signal-safe sched_setaffinity system call on a local set.
        unsafe {
            command.pre_exec(move || {
                crate::affinity::pin_current_thread(cpu);
                Ok(())
            });
        }
    }
    let mut child = command.spawn()?;
    let exit = match wait_with_limit(&mut child, limit)? {
        Some(status) if status.success() => Exit::Success,
        Some(status) => Exit::Failed(status.to_string()),
        None => Exit::TimedOut,
    };
    let output = String::from_utf8_lossy(&fs::read(&log_path)?).into_owned();
    Ok(Finished { exit, output })
}

/// How long a child asked to stop (SIGTERM) at its limit has before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Waits for `child` for at most `limit`; at the limit stops and reaps it and returns `None`.
/// Stopping is SIGTERM, then SIGKILL after [`STOP_GRACE`]: a launcher such as `mpirun` takes
/// its ranks down on SIGTERM, while SIGKILL would leave them running.
///
/// A helper thread blocks in `waitid(WNOWAIT)`, which sees the exit without reaping, so the
/// child stays ours (a zombie at worst) until this thread reaps it: a signal can never hit a
/// recycled pid, and no polling loop wakes up during the measurement.
fn wait_with_limit(child: &mut Child, limit: Duration) -> io::Result<Option<ExitStatus>> {
    let pid = child.id();
    let (exited_tx, exited_rx) = mpsc::channel();
    let watcher = thread::spawn(move || {
        let result = wait_exit_no_reap(pid);
        let _ = exited_tx.send(());
        result
    });
    let status = match exited_rx.recv_timeout(limit) {
        Ok(()) => Some(child.wait()?),
        Err(_) => {
            // Not yet reaped (the watcher does not reap), so the pid is still this child's.
            // SAFETY: kill(2) on our own unreaped child's pid.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
            if exited_rx.recv_timeout(STOP_GRACE).is_err() {
                let _ = child.kill();
            }
            child.wait()?;
            None
        }
    };
    // The child has exited and been reaped by now, so the watcher has returned or will at once.
    let _ = watcher.join();
    Ok(status)
}

/// Blocks until process `pid` (our child) exits, without reaping it.
fn wait_exit_no_reap(pid: u32) -> io::Result<()> {
    loop {
        // SAFETY: `info` is a plain C struct that waitid fills in; pid is our own child.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid writes only into `info`, a valid siginfo_t of ours; WNOWAIT leaves
        // the child to be reaped by its owner.
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// A private scratch directory for one run's logs and result files, removed when dropped.
///
/// The tools are run with it as their working directory so that files they write by default
/// (NetPIPE's `np.out`) never land in the user's directory.
#[derive(Debug)]
pub struct WorkDir {
    path: PathBuf,
}

impl WorkDir {
    /// Creates `$TMPDIR/nicmsg-bench-<tag>-<pid>-<n>`; `n` keeps two runs in one process (the
    /// two ranks of a test) apart.
    pub fn create(tag: &str) -> io::Result<WorkDir> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("nicmsg-bench-{tag}-{}-{n}", std::process::id()));
        fs::create_dir_all(&path)?;
        Ok(WorkDir { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn command_line_quotes_only_what_a_shell_would_split() {
        let cmd = CommandLine::new("fi_pingpong").env("UCX_TLS", "tcp").args([
            "-p",
            "udp;ofi_rxd",
            "-S",
            "8",
            "it's",
        ]);
        assert_eq!(
            cmd.to_string(),
            r"UCX_TLS=tcp fi_pingpong -p 'udp;ofi_rxd' -S 8 'it'\''s'"
        );
        assert_eq!(CommandLine::new("x").args([""]).to_string(), "x ''");
        let pinned = CommandLine::new("NPtcp").on_cpu(Some(1)).env("A", "b");
        assert_eq!(pinned.to_string(), "A=b taskset -c 1 NPtcp");
    }

    #[test]
    fn captures_output_and_status() {
        let dir = WorkDir::create("process-test").unwrap();
        let ok = CommandLine::new("sh").args(["-c", "echo out; echo err >&2"]);
        let done = run_bounded(&ok, dir.path(), "ok", Duration::from_secs(10)).unwrap();
        assert_eq!(done.exit, Exit::Success);
        assert!(done.output.contains("out") && done.output.contains("err"));

        let bad = CommandLine::new("sh").args(["-c", "exit 3"]);
        let done = run_bounded(&bad, dir.path(), "bad", Duration::from_secs(10)).unwrap();
        assert!(matches!(done.exit, Exit::Failed(ref s) if s.contains('3')));
    }

    #[test]
    fn pins_a_child_to_a_cpu() {
        let dir = WorkDir::create("process-test").unwrap();
        let cpu = *crate::affinity::allowed_cpus()
            .last()
            .expect("some CPU is allowed");
        let cmd = CommandLine::new("grep")
            .on_cpu(Some(cpu))
            .args(["Cpus_allowed_list", "/proc/self/status"]);
        let done = run_bounded(&cmd, dir.path(), "pin", Duration::from_secs(10)).unwrap();
        assert_eq!(done.exit, Exit::Success);
        assert!(
            done.output.trim_end().ends_with(&format!("\t{cpu}")),
            "{}",
            done.output
        );
    }

    #[test]
    fn kills_a_child_at_the_limit() {
        let dir = WorkDir::create("process-test").unwrap();
        let slow = CommandLine::new("sleep").args(["30"]);
        let start = Instant::now();
        let done = run_bounded(&slow, dir.path(), "slow", Duration::from_millis(200)).unwrap();
        assert_eq!(done.exit, Exit::TimedOut);
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_child_that_ignores_sigterm_is_killed_after_the_grace() {
        let dir = WorkDir::create("process-test").unwrap();
        // An ignored signal stays ignored across exec.
        let stubborn = CommandLine::new("sh").args(["-c", "trap '' TERM; exec sleep 30"]);
        let start = Instant::now();
        let done = run_bounded(
            &stubborn,
            dir.path(),
            "stubborn",
            Duration::from_millis(100),
        )
        .unwrap();
        assert_eq!(done.exit, Exit::TimedOut);
        let took = start.elapsed();
        assert!(
            took >= STOP_GRACE && took < STOP_GRACE + Duration::from_secs(5),
            "{took:?}"
        );
    }

    #[test]
    fn missing_program_is_an_error_not_a_panic() {
        let dir = WorkDir::create("process-test").unwrap();
        let cmd = CommandLine::new("nicmsg-bench-no-such-program");
        assert!(run_bounded(&cmd, dir.path(), "x", Duration::from_secs(1)).is_err());
    }

    #[test]
    fn work_dir_is_removed_on_drop() {
        let dir = WorkDir::create("process-test").unwrap();
        let path = dir.path().to_path_buf();
        fs::write(path.join("f"), "x").unwrap();
        drop(dir);
        assert!(!path.exists());
    }
}
